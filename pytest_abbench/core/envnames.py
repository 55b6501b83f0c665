"""Every environment variable the package reads or sets, by name, with who reads it and why.

Each constant's value is the variable's name; code says ``envnames.X``
rather than spelling the name, so a grep for this module finds every use.
"""

from __future__ import annotations

# Set by the user; session/options.py reads it: seconds before a cell's process group is killed.
CELL_TIMEOUT = "CELL_TIMEOUT"
# Set by the user; session/options.py and `abbench history` read it: the history file, or "off" (--ab-history).
ABBENCH_HISTORY = "ABBENCH_HISTORY"
# Set by GitHub Actions for each step; session/reporting.py appends the markdown summary to the file it names.
GITHUB_STEP_SUMMARY = "GITHUB_STEP_SUMMARY"
# Set by the user; core/cores.py reads it: compile processes at once, instead of cores over workers.
ABBENCH_COMPILE_JOBS = "ABBENCH_COMPILE_JOBS"
# Set by the user; child/measure.py reads it: "1" profiles each shape's calls after its timed windows on a GPU
# (child/kernelprofile.py): the kernels one call launches, matched across the sides in the report.
ABBENCH_KERNEL_SPLIT = "ABBENCH_KERNEL_SPLIT"
# Set by spawn/runner.py; child/measure.py reads it: when the parent started the child (its start-up cost).
ABBENCH_SPAWN_TIME = "ABBENCH_SPAWN_TIME"
# Set by spawn/runner.py and campaign/probe.py; core/standin_driver.py reads it: the IR target a process without a
# GPU answers Triton's driver queries for (--ab-ir-target).
ABBENCH_IR_TARGET = "ABBENCH_IR_TARGET"
# Set for the compile-only run a measured interpreter cell starts to capture IR: its marker lines are not the
# cell's measurement (the measured run already printed any replay miss) and are not counted.
ABBENCH_IR_CAPTURE = "ABBENCH_IR_CAPTURE"
# Set to "0" by spawn/precompile.py; child/ircapture.py reads it: no per-pass dump in a precompile process.
ABBENCH_PASS_DUMP = "ABBENCH_PASS_DUMP"
# Set by the user; child/ircapture.py reads it: "1" keeps torch's own large draws in a compile-only process
# (child/standin_draws.py tiles them from a small draw otherwise).
ABBENCH_EXACT_DRAWS = "ABBENCH_EXACT_DRAWS"
# Set by spawn/runner.py; child/measure.py and FlagGems' LibTuner read it: the cell's library tuner cache.
FLAGGEMS_CACHE_DIR = "FLAGGEMS_CACHE_DIR"
# Set by the user (XDG); core/usercache.py reads it: the kernel cache's and the bytecode's default folders.
XDG_CACHE_HOME = "XDG_CACHE_HOME"
# Set by the user; child/bytecode.py reads it in a fork server: "off", or the folder for the bytecode of what the
# server imports (used even where the packages keep their own); unset: the user's cache, where torch keeps none.
ABBENCH_BYTECODE = "ABBENCH_BYTECODE"
# Set by the user; session/options.py reads it: the persistent kernel cache's folder, or "off" (--ab-kernel-cache).
ABBENCH_KERNEL_CACHE = "ABBENCH_KERNEL_CACHE"
# Set by spawn/runner.py; Triton reads it: each side's own compile cache (many switches are not in its key).
TRITON_CACHE_DIR = "TRITON_CACHE_DIR"
# Set by spawn/runner.py for the interpreter backend, dropped by child/measure.py for IR capture; Triton reads it.
TRITON_INTERPRET = "TRITON_INTERPRET"
# Set and dropped by child/ircapture.py; Triton's pass managers read it at each compile: dump IR after each pass.
MLIR_ENABLE_DUMP = "MLIR_ENABLE_DUMP"
# Set by child/ircapture.py; LLVM opens it at the first compile: where the per-pass dump goes.
MLIR_DUMP_PATH = "MLIR_DUMP_PATH"
# Set by spawn/runner.py (the cell's GPU); CUDA, core/settings.py and child/identity.py read it.
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
# Set by spawn/runner.py (the package's parent first); Python reads it: the child imports this copy.
PYTHONPATH = "PYTHONPATH"
# Set to "1" by spawn/runner.py; Python reads it: the child's run.log is written as it goes.
PYTHONUNBUFFERED = "PYTHONUNBUFFERED"
# Set by xdist on a worker; session/campaign_session.py reads it: absent means no controller to watch.
PYTEST_XDIST_WORKER = "PYTEST_XDIST_WORKER"
# Set by xdist on a worker; spawn/precompile.py reads it: the host's cores are shared over this many workers.
PYTEST_XDIST_WORKER_COUNT = "PYTEST_XDIST_WORKER_COUNT"
# Set by pytest (the running test, i.e. the cell); spawn/forkserver.py keeps it out of a server's key.
PYTEST_CURRENT_TEST = "PYTEST_CURRENT_TEST"

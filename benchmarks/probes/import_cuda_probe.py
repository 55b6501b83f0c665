"""Does importing a module initialise CUDA, and from where?  The question a fork server's SERVER_IMPORTS asks.

    python3 benchmarks/probes/import_cuda_probe.py flag_gems [--env ARCH=sm_90 ...] [--env "GEMS_VENDOR=nvidia ARCH=sm_90"]

Imports torch and Triton, then the module, in a fresh interpreter per environment given (the first with no
extra variable), with a profile hook on torch.cuda's lazy initialiser: the first call that initialises CUDA is
caught and its Python stack printed, the frames outside torch first.  Prints per environment: the import's wall
time, whether CUDA was initialised after it, whether a child forked after it finds CUDA refused (torch marks a
fork bad once the parent queried the CUDA runtime, a device count included, with no context made: a fork server
cannot import such a module either), and that stack (none when the import left CUDA alone).  One ``--env`` may set
several variables, separated by spaces.  Needs a GPU for the answer to mean anything: without one, torch.cuda
initialises nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

PROBE = r'''
import importlib, json, sys, threading, time, traceback
import torch, triton
caught = []

def hook(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "_lazy_init" and "torch/cuda" in frame.f_code.co_filename \
            and not torch.cuda.is_initialized() and not caught:
        caught.append(traceback.format_stack(frame.f_back, limit=40))

sys.setprofile(hook)
threading.setprofile(hook)
started = time.perf_counter()
importlib.import_module(sys.argv[1])
seconds = time.perf_counter() - started
sys.setprofile(None)
threading.setprofile(None)
import os
pid = os.fork()
if pid == 0:
    os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
_, status = os.waitpid(pid, 0)
print(json.dumps({"import_s": round(seconds, 3), "cuda_initialized": torch.cuda.is_initialized(),
                  "fork_poisoned": os.waitstatus_to_exitcode(status) != 0, "stack": caught[0] if caught else []}))
'''


def probe(module: str, extra_env: dict[str, str]) -> dict[str, object]:
    env = {**os.environ, **extra_env}
    done = subprocess.run([sys.executable, "-c", PROBE, module], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-2000:]}"}
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("module")
    parser.add_argument("--env", action="append", default=[],
                        help="'NAME=VALUE [NAME=VALUE ...]': one more run with these variables")
    args = parser.parse_args()
    for setting in [None, *args.env]:
        extra = dict(item.split("=", 1) for item in setting.split()) if setting else {}
        found = probe(args.module, extra)
        print(f"== import {args.module} with {setting or 'the environment as is'}")
        if "error" in found:
            print(f"   failed: {found['error']}")
            continue
        print(f"   import took {found['import_s']} s; CUDA initialised after it: {found['cuda_initialized']}; "
              f"a fork after it refused CUDA: {found['fork_poisoned']}")
        frames = found["stack"]
        assert isinstance(frames, list)
        stack = [frame for frame in frames if "/torch/" not in frame]
        if stack:
            print("   first CUDA initialisation from (frames outside torch, innermost last):")
            for frame in stack[-8:]:
                print("   " + frame.rstrip().replace("\n", "\n   "))
    return 0


if __name__ == "__main__":
    sys.exit(main())

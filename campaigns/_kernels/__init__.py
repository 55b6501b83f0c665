"""Triton kernels and input helpers used by the campaigns (imported inside each op's build, never at collection)."""

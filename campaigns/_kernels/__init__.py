"""Triton kernels used by the campaigns (imported inside each op's build, never at collection)."""

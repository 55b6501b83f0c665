"""The pytest side: options, collection, fixtures, the campaign root, progress, xdist, the GPU claim.

The only package that imports pytest.
"""

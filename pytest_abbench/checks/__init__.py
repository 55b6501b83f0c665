"""Checks that decide whether numbers may be compared: the caliber check and the IR gate."""

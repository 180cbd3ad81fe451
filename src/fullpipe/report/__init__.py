"""``fullpipe report`` and the console presentation of experiment results."""

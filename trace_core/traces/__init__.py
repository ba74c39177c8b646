"""One answer's decoding trace and many answers' traces as columns: the data every method reads."""

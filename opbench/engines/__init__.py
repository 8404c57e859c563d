"""Other inference engines opbench can drive to produce reference timings (`opbench reference`)."""

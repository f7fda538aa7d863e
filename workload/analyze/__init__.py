"""Analysis: metric catalogue, thresholds, bootstrap, verdict, text rendering."""

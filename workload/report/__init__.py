"""Reports: HTML run and compare reports, charts, console text."""

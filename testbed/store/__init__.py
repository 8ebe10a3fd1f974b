"""A stored run: its directory (runs), its records (results, history) and their formats, read and written."""

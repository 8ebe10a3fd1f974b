"""What a run prints and stores: tables, results, timelines, progress."""

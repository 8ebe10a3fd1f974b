"""The profilers: where the lab's cost goes, by process, function, page and instruction."""

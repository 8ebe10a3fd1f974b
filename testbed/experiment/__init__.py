"""The experiment: the workload, the scenarios and the matrix of cells."""

"""The judge: what the run observed, what the model predicts, and the verdict."""

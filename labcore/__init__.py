"""The core every process of a run shares: vocabulary, wire formats, the bus,
process lifelines. It imports nothing above it."""

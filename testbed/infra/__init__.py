"""The infrastructure a run stands on: Redis, the provider process, the RQ workers."""

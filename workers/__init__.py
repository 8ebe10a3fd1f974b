"""The RQ side of the lab: the tool handler, its recovery strategies and the local ledger."""

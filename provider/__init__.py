"""The provider: a separate process standing in for an external API, owner of the effect log."""

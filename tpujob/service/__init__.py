"""Use cases. Each CLI command calls exactly one function here."""

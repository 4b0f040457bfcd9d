"""Online retrieval for a batch of queries, in the order data flows: seed -> expand ->
propagate -> select. Every stage takes B queries at once."""

"""The Llama stack (`llama_block`): its spec and its torch and TF implementations (see
`suites.models`)."""

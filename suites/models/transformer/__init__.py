"""The transformer block and the language models built on it (`transformer`, `bert_base`,
`gpt2_small`): their specs and their torch and TF implementations (see `suites.models`)."""

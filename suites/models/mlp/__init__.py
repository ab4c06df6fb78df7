"""The multilayer perceptron (`mlp`): its spec and its torch and TF implementations (see
`suites.models`)."""

"""The residual CNN (`cnn`): its spec and its torch and TF implementations (see `suites.models`)."""

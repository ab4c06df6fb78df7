"""ResNet-50 v1.5 and its deeper and shallower stacks (`resnet50`): its spec and its torch and TF
implementations (see `suites.models`)."""

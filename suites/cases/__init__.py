"""What a case is: the names of the axes, `Case`, suites (grids and their timing settings),
filters, and where to find a strategy's plugin. The bottom layer: it imports no other layer."""

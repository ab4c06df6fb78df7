"""What is kept: measurements, numerics checks, records and their store, provenance (devices,
library versions), derived metrics and device peaks. Imports only `suites.cases` and workloads."""

"""What is kept: measurements, numerics checks, records and their store, provenance, derived
metrics and the verdicts and readings stored with them. Imports only the vocabulary (`suites`,
`suites.cases`, `suites.errors`, `suites.knobs`) and `suites.hardware`: a report reads records
without the code that produced them."""

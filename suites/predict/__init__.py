"""`parbench predict`: a training step projected onto device types, counts, nodes and fabrics nobody
here has, with the source of every input and an error band, and a validation set that measures the
error (docs/predict.md).

The pieces, one concept each: `catalogue` (device types and fabrics, sourced), `inputs` (an input's
value and where it came from), `workload` (what is projected: model, sizes, precision, strategy),
`base` (the measured or published throughput projected from), `alpha_beta` (a collective's time on
a topology, NCCL's ring and tree), `exchange` (a strategy plugin's exchange priced on a target),
`compute` (the per-sample compute time on a target), `memory` (bytes per device, fits, largest batch),
`projection` (a target's projection and `projections_frame`, what a report view calls), `validation`
(the shipped rows and their score). A projection is never a record: nothing here writes one.
"""

"""Studies: scripts that answer one question on this machine by interleaved runs — does compiling
pay (`compile_speedup`), what synchronised batch norm costs (`sync_batchnorm_cost`), a TF
pipeline's step against its theoretical bubble (`tf_pipeline_bubble`), a 2-node run over a
rate-limited link between network namespaces, `parbench predict`'s validation data (`namespace_link`)."""

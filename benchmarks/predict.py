"""asv benchmarks of `parbench predict`: the projection's own speed, and the validation set's score.

`TimeProject.time_project_1000_targets` projects ResNet-50 from a published one-GPU figure onto 1,000
targets (thousands a second is plenty); `TrackValidation` tracks the shipped validation set's median
and worst absolute error and band coverage on weak-scaling rows, and the median error of the namespace
rows (this machine, 2 namespaces, gloo), every one of them contended (docs/predict.md). Nothing runs at
import.
"""
from __future__ import annotations


class TimeProject:
    def setup(self) -> None:
        from suites.predict.base import parse_base
        from suites.predict.catalogue import Catalogue
        from suites.predict.projection import Options, parse_target
        from suites.predict.workload import resolve_workload

        self.catalogue = Catalogue.load()
        self.workload = resolve_workload("resnet50", {}, "bf16", "ddp")
        self.base = parse_base("H100 SXM:1=3000@256", self.catalogue)
        names = ["H100 SXM", "H200", "A100 80GB", "B200"]
        self.targets = [parse_target(f"{names[i % 4]}:8x{1 + i % 250}", self.catalogue) for i in range(1000)]
        fabric = self.catalogue.fabric(self.catalogue.default_fabric)
        self.options = Options(fabric, "default")

    def time_project_1000_targets(self) -> None:
        from suites.predict.projection import project

        for target in self.targets:
            project(self.workload, self.base, target, self.options, self.catalogue)


class TrackValidation:
    unit = "fraction"

    def setup(self) -> None:
        from suites.predict.catalogue import Catalogue
        from suites.predict.validation import score, validate

        summary = score(validate(Catalogue.load()))
        self.summary = summary["weak"]
        self.namespace = summary["namespace"].get("with_contended") or summary["namespace"]

    def track_weak_median_abs_error(self) -> float:
        return self.summary["median_abs_error"]

    def track_weak_worst_abs_error(self) -> float:
        return self.summary["worst_abs_error"]

    def track_weak_band_coverage(self) -> float:
        return self.summary["band_coverage"]

    def track_namespace_median_abs_error_contended(self) -> float:
        return self.namespace["median_abs_error"]

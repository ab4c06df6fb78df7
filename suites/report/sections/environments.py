"""Environments: every distinct environment each machine ran in (software, threads, code)."""
from __future__ import annotations

from suites.report.analyses.frame import ReportFrame
from suites.report.load.columns import ENVIRONMENT
from suites.report.render.page import Section
from suites.report.render.tables import Column, fmt_number, fmt_text, tabulate
from suites.report.sections.base import ReportOptions

TITLE, ANCHOR = "Environments", "environments"
TEXT = "Every distinct environment each machine ran in: a machine listed twice changed software, threads or code."
COLUMNS = [Column("machine", "machine", fmt_text), Column("source", "source", fmt_text),
           Column("hostname", "hostname", fmt_text), Column("CPU", "cpu_model", fmt_text),
           Column("cores", "cpu_cores", fmt_number), Column("memory GiB", "memory_gib", fmt_number),
           Column("GPUs", "gpus", fmt_text), Column("OS", "os", fmt_text), Column("Python", "python", fmt_text),
           Column("libraries", "libraries", fmt_text), Column("parbench commit", "git_commit", fmt_text),
           Column("threads", "threads", fmt_text), Column("runs", "runs", fmt_number),
           Column("records", "records", fmt_number), Column("first", "first", fmt_text),
           Column("last", "last", fmt_text)]


def build(frame: ReportFrame, options: ReportOptions) -> Section:
    keys = ["machine", "source", *ENVIRONMENT]
    envs = (frame.records.groupby(keys, dropna=False, sort=True)
            .agg(runs=("run_id", "nunique"), records=("case_id", "size"), first=("timestamp", "min"),
                 last=("timestamp", "max")).reset_index())
    for column in ("first", "last"):
        envs[column] = envs[column].dt.strftime("%Y-%m-%d %H:%M UTC")
    section = Section(TITLE, ANCHOR, text=[TEXT])
    section.tables.append(tabulate(envs, COLUMNS))
    return section

"""What /proc says about a process, for the benchmarks that report the CPU and memory their processes used
(job_bench.py, controller_bench.py). Standard library only."""
import os
import re


def cpu_seconds(pid):
    """User + system CPU seconds the process has spent so far."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def peak_rss_mib(pid):
    """The process's peak resident set (VmHWM), MiB."""
    text = open(f"/proc/{pid}/status").read()
    return int(re.search(r"VmHWM:\s+(\d+) kB", text).group(1)) / 1024

"""harness.metrics — the Prometheus text the admin API's /metrics answers, parsed."""

import re


def parse_prometheus(text):
    """Returns a list of (name, {label: value}, float) samples; raises ValueError on bad lines."""
    samples = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?', line.strip())
        if not m:
            raise ValueError("bad metrics line %r" % line)
        labels = {}
        if m.group(3):
            for lm in re.finditer(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3)):
                labels[lm.group(1)] = lm.group(2)
        v = m.group(4)
        samples.append((m.group(1), labels, float(v.replace("+Inf", "inf"))))
    return samples


def metric_values(samples, name, **labels):
    return [v for n, l, v in samples
            if n == name and all(l.get(k) == str(x) for k, x in labels.items())]

"""Regenerates examples/20-jobs.yaml: a morning of Jobs from three teams (deterministic).

    python3 examples/generate_jobs.py > examples/20-jobs.yaml
"""

from __future__ import annotations

import sys

TEAMS = (
    # namespace, queue, name, count, every (s), parallelism cycle, cpu, memory, priority class, gpus
    ("team-a", "default", "etl", 120, 20, (1, 2, 3), "1", "4Gi", "batch", None),
    ("team-a", "default", "release", 12, 200, (2,), "3", "8Gi", "production", None),
    ("team-b", "default", "train", 90, 27, (2, 4), "2", "8Gi", "batch", None),
    ("team-b", "default", "hotfix", 8, 290, (1,), "4", "8Gi", "production", None),
    ("ml", "gpu", "finetune", 50, 45, (1, 2), "2", "8Gi", None, 2),
    ("ml", "gpu", "infer", 40, 55, (1,), "1", "2Gi", None, 1),
)


def job(ns: str, name: str, queue: str, t: int, parallelism: int, cpu: str, mem: str, prio: str | None,
        gpu: int | None, duration: int) -> str:
    labels = [f"    kueue.x-k8s.io/queue-name: {queue}"]
    if prio:
        labels.append(f"    kueue.x-k8s.io/priority-class: {prio}")
    reqs = [f'            cpu: "{cpu}"', f"            memory: {mem}"]
    if gpu:
        reqs.append(f'            nvidia.com/gpu: "{gpu}"')
    h, rem = divmod(t, 3600)
    m, s = divmod(rem, 60)
    newline = "\n"
    return f"""apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: {ns}
  creationTimestamp: "2025-01-01T{9 + h:02d}:{m:02d}:{s:02d}Z"
  labels:
{newline.join(labels)}
  annotations:
    kueuelog.io/sim-duration: {duration}s
spec:
  parallelism: {parallelism}
  completions: {parallelism}
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: registry.k8s.io/e2e-test-images/agnhost:2.53
        args: ["pause"]
        resources:
          requests:
{newline.join(reqs)}
"""


def main() -> None:
    docs = []
    for ti, (ns, queue, base, count, every, pars, cpu, mem, prio, gpu) in enumerate(TEAMS):
        for i in range(count):
            t = i * every + ti * 7
            duration = 60 + (i * 37 + ti * 101) % 540
            docs.append((t, job(ns, f"{base}-{i:03d}", queue, t, pars[i % len(pars)], cpu, mem, prio, gpu,
                                duration)))
    docs.sort(key=lambda d: d[0])
    sys.stdout.write("# A morning of Jobs from three teams; regenerate with examples/generate_jobs.py.\n")
    sys.stdout.write("---\n".join(d for _, d in docs))


if __name__ == "__main__":
    main()

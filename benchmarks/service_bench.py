"""The issue-11 parts of the harness: the resident service's life and checks, resolve latency."""

from __future__ import annotations

from . import competitors, history10k
from .common import log
from .measure import fmt_bytes, fmt_seconds


class ServiceScenarios:
    """Mixed into benchmarks.run.Bench (which holds args, notes and facts)."""

    args: object
    notes: list[str]
    facts: dict

    def start_service(self, comps: dict, corpus: str) -> None:
        """Start snap-svc's service (after its initial checkpoint, which the service must not
        see being set up again)."""
        svc = comps.get("snap-svc")
        if svc is None:
            return
        svc.start_service()
        if not svc.supported:
            self.notes.append("snap-svc: this snapstore has no `serve`; its rows are n/a.")
        log(f"{corpus}: service " + (f"pid {svc.pid}" if svc.supported else "not available"))

    def stop_service(self, comps: dict, corpus: str) -> None:
        svc = comps.get("snap-svc")
        if svc is None or not svc.supported or svc.pid is None:
            return
        st = svc.service_status()
        hwm = svc.service_peak_rss_kib()
        w = st.get("watcher") or {}
        self.facts["sessions"].append(
            f"{corpus} service at the end: {st.get('requests')} requests, peak RSS "
            f"{fmt_bytes(hwm * 1024 if hwm else None)}, watcher: {w.get('watched_dirs')} dirs, "
            f"{w.get('events')} events, {w.get('full_rescans')} full rescans, {w.get('overflows')} "
            f"overflows, last error {w.get('last_error') or st.get('last_error')}"
        )
        svc.stop_service()

    def check_service(self, svc, corpus: str, label: str, requests0: int, calls: int) -> None:
        """The CLI processes of snap-svc must have gone through the service (serve --status)."""
        got = (svc.requests() or 0) - requests0
        ok = got >= calls
        self.facts.setdefault("service_checks", []).append(
            {"corpus": corpus, "label": label, "calls": calls, "requests": got, "ok": ok})
        if not ok:
            self.notes.append(f"SERVICE CHECK FAILED: {corpus} {label}: {calls} snap-svc commands, "
                              f"only {got} reached the service")
            log(f"SERVICE CHECK FAILED {corpus} {label}: {got} of {calls}")

    def resolve(self, work: str) -> None:
        n = self.args.resolve_checkpoints
        log(f"resolve latency: building {n} checkpoints")
        try:
            doc = history10k.measure_resolve(work, n, reps=20, cli_runs=self.args.runs,
                                             src=competitors.SNAPSTORE_SRC)
        except RuntimeError as exc:
            self.notes.append(f"resolve at {n} checkpoints: FAILED: {exc}")
            log(f"resolve FAILED: {exc}")
            return
        self.facts["resolve"] = doc
        if not doc["service_ok"]:
            self.notes.append(f"SERVICE CHECK FAILED: show latest: {doc['service_requests']} requests")
        log("resolve: " + ", ".join(f"{k} {fmt_seconds(v.get('median_s'))}" for k, v in doc["library"].items())
            + f"; show latest CLI {fmt_seconds(doc['cli_show_latest'])}, with service "
            f"{fmt_seconds(doc['cli_show_latest_service'])}")


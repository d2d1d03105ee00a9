"""``kueuelog webhook``: the admission webhook service (``services.webhook``) over HTTPS.

It needs a serving certificate the API server trusts (``deploy/webhook/``: cert-manager, or
``deploy/webhook/selfsigned.sh`` for local runs) and a Kubernetes client to read T9k Queues.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import ssl
from typing import TYPE_CHECKING

import structlog

from services.app.exits import ConfigurationError

if TYPE_CHECKING:
    from typing import TypeAlias

    Subcommands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

log = structlog.get_logger("kueuelog.webhook")
CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # where the Deployment mounts the Secret


def add_parser(sub: Subcommands) -> None:
    env = os.environ.get
    wh = sub.add_parser(
        "webhook", help="serve the admission webhooks (queued Jobs created suspended; Kueue objects and T9k "
                        "Queues validated; T9k Queue rules at creation)",
        description="Serve the mutating and validating admission webhooks over HTTPS until SIGINT or SIGTERM. "
                    "The API server calls them as deploy/webhook/webhooks.yaml configures.")
    wh.add_argument("--tls-cert-file", default=env("KUEUELOG_WEBHOOK_CERT", f"{CERT_DIR}/tls.crt"),
                    metavar="PATH", help="serving certificate (PEM; default: KUEUELOG_WEBHOOK_CERT, else the "
                                         "cert-manager mount /tmp/k8s-webhook-server/serving-certs/tls.crt)")
    wh.add_argument("--tls-key-file", default=env("KUEUELOG_WEBHOOK_KEY", f"{CERT_DIR}/tls.key"),
                    metavar="PATH", help="its private key (default: KUEUELOG_WEBHOOK_KEY, else tls.key next to it)")
    wh.add_argument("--host", default=env("KUEUELOG_WEBHOOK_HOST", "0.0.0.0"), metavar="ADDRESS")
    wh.add_argument("--port", type=int, default=int(env("KUEUELOG_WEBHOOK_PORT", "9443")), metavar="PORT")
    wh.add_argument("--kubeconfig", default=env("KUEUELOG_KUBECONFIG") or env("KUBECONFIG"), metavar="PATH",
                    help="default: KUEUELOG_KUBECONFIG, else KUBECONFIG, else the in-cluster configuration")
    wh.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from services.webhook.server import tls_context

    try:
        tls = tls_context(args.tls_cert_file, args.tls_key_file)
    except (OSError, ssl.SSLError) as e:
        raise ConfigurationError(f"webhook serving certificate {args.tls_cert_file} / {args.tls_key_file}: {e}") from e
    asyncio.run(_serve(args, tls))
    return 0


async def _serve(args: argparse.Namespace, tls: ssl.SSLContext) -> None:
    from kubernetes_asyncio import client

    from services.runtime.kubeclient import KubeConfigError, client_configuration
    from services.webhook.server import Cluster, application, serve

    try:
        cfg = await client_configuration(args.kubeconfig)
    except KubeConfigError as e:
        raise ConfigurationError(str(e)) from e
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with client.ApiClient(configuration=cfg) as api:
        try:
            runner = await serve(application(Cluster(api)), args.host, args.port, tls)
        except OSError as e:
            raise ConfigurationError(f"cannot serve the webhook on {args.host}:{args.port}: {e}") from e
        log.info("webhook.serving", host=args.host, port=args.port)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

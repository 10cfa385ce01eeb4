"""What drives a local fleet's size: the policy the operator runs, built from the manifest, and the engines'
own ``/metrics`` scraped directly (the autoscaler's scrape source over the engine kind's series; no Prometheus
needed). The policy's knobs
come from the operator's own mapping of the CRD, so both run the same configuration."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import httpx

from shoal.autoscale.policy import ScalingPolicy
from shoal.autoscale.scrape_source import ScrapeSource
from shoal.autoscale.shoal_policy import ShoalPolicy
from shoal.autoscale.source import MetricsSource
from shoal.engine_kinds import adapter
from shoal.operator.autoscaler import autoscaling_config
from shoal.operator.spec import InferenceDeploymentSpec

SourceFactory = Callable[[httpx.AsyncClient], MetricsSource]


def autoscaling(spec: InferenceDeploymentSpec) -> tuple[ScalingPolicy | None, SourceFactory]:
    """The policy (None while ``autoscaling.enabled`` is false: the count stays fixed) and how to make the
    source, which the view reads either way."""
    policy = ShoalPolicy(autoscaling_config(spec)) if spec.autoscaling.enabled else None
    return policy, partial(ScrapeSource, metrics=adapter(spec.engine.kind).metrics)

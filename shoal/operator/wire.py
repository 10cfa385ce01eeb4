"""The wire form every CRD model shares: camelCase names, unknown fields refused, CEL rules beside the fields.

:mod:`.spec` and :mod:`.core_api` build on it; :mod:`.crd` turns the models into the CRD's schema."""

from __future__ import annotations

from typing import Annotated

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonDict

# A Kubernetes quantity as the CRD accepts it ("4", "500m", "16Gi"); at most 64 characters, which also bounds the
# cost of the CEL rules that parse it.
Quantity = Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?([EPTGMK]i?|[mkMGTPE])?$", max_length=64)]


class Wire(BaseModel):
    """Base: camelCase on the wire, unknown fields rejected (the apiserver prunes them anyway)."""

    model_config = ConfigDict(
        alias_generator=AliasGenerator(alias=to_camel), populate_by_name=True, extra="forbid", frozen=True
    )


def cel(*rules: tuple[str, str] | tuple[str, str, str]) -> ConfigDict:
    """Model config carrying CEL rules (rule, message[, fieldPath]) into the generated schema; ``fieldPath``
    (relative to the model, e.g. ``.requests``) is the field the apiserver names when the rule fails."""
    return Wire.model_config | ConfigDict(json_schema_extra={"x-kubernetes-validations": [_rule(*r) for r in rules]})


def _rule(rule: str, message: str, field_path: str | None = None) -> JsonDict:
    out: JsonDict = {"rule": rule, "message": message}
    if field_path:
        out["fieldPath"] = field_path
    return out

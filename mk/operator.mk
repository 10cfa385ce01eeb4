# Operator: regenerate the CRD (crds/ and charts/shoal/crds/) and the chart's alert rules from shoal/operator.
.PHONY: crds crds-check
crds: install
	$(PY) -m shoal.operator crd --write

crds-check: install
	$(PY) -m shoal.operator crd --check

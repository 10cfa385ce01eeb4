# moto's standalone S3 server, the fetcher tests' S3 stand-in, and botocore, their SigV4 reference: a venv of its own
# (botocore pins python-dateutil<3, which kubernetes in .venv refuses), made once by hack/moto/install.sh.
.PHONY: moto

# Installs the pinned moto[server], boto3 and botocore into $(SHOAL_CACHE)/moto-venv; a no-op when already there.
moto:
	@bash hack/moto/install.sh >/dev/null

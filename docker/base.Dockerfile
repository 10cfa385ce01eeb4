# A base image from a Debian root filesystem (rootfs.tar, made by mmdebstrap in hack/images/build.sh), for
# machines that cannot pull one from a registry.
FROM scratch
ADD rootfs.tar /
CMD ["/bin/bash"]

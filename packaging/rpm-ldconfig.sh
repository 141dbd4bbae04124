# shellcheck shell=sh
# RPM %post/%postun: refresh the loader cache so dlopen("libnccl-net-gdr.so") finds the plugin at once.
if [ -x /sbin/ldconfig ]; then /sbin/ldconfig; elif command -v ldconfig >/dev/null 2>&1; then ldconfig; fi

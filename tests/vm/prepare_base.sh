#!/bin/bash
# tests/vm/prepare_base.sh — builds the VM test's Debian root into its
# cache (build/vm/, keyed as tests/vm/vm.inc's vm_base says) and nothing
# else, so that CI can debootstrap it while the ASan pass runs and `make
# test-vm` then finds it cached (most of the test's time with no cache is
# debootstrap, which waits on the mirror more than on the CPU). Run as root
# after `tools/deps.sh vm`. Exit 0 built or already cached, 1 fail, 77 skip
# (as systemd_vm.sh: no root, qemu, debootstrap or mirror).
. "$(dirname "$0")/../e2e/lib.sh"
. "$(dirname "$0")/vm.inc"
e2e_init vm_prepare
vm_need
vm_base
vm_log "root ready: $VM_BASE"

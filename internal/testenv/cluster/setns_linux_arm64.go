package cluster

import "syscall"

const sysSetns = syscall.SYS_SETNS

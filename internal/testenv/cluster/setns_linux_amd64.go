package cluster

// sysSetns is setns(2)'s number; package syscall does not define it on amd64.
const sysSetns = 308

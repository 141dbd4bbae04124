/* Every NCCL network-plugin ABI version libnccl-net-gdr exports (v6..v12). */
#ifndef GDRNET_NET_H
#define GDRNET_NET_H

#include "gdrnet/net_common.h"
#include "gdrnet/net_v6.h"
#include "gdrnet/net_v7.h"
#include "gdrnet/net_v8.h"
#include "gdrnet/net_v9.h"
#include "gdrnet/net_v10.h"
#include "gdrnet/net_v11.h"
#include "gdrnet/net_v12.h"

#endif /* GDRNET_NET_H */

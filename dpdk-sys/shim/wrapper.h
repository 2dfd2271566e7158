/* Headers bindgen reads, plus the shim's own declarations. */
#include <rte_config.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_log.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_memory.h>
#include <rte_thread.h>
#include <rte_version.h>
#include <rte_dev.h>
#include <rte_bus_vdev.h>
#include "shim.h"

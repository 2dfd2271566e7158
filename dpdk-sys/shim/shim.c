#include <rte_config.h>
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_thash.h>

#include <rte_eth_bond.h>
#include <rte_eth_bond_8023ad.h>
#include "shim.h"

uint16_t tlsdp_eth_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_rx_burst(port, queue, pkts, n);
}

int tlsdp_bond_active_members(uint16_t port)
{
	uint16_t members[RTE_MAX_ETHPORTS];
	struct rte_eth_bond_8023ad_slave_info info;
	int n, i, distributing = 0;

	n = rte_eth_bond_active_slaves_get(port, members, RTE_MAX_ETHPORTS);
	if (n < 0 || rte_eth_bond_mode_get(port) != BONDING_MODE_8023AD)
		return n;
	for (i = 0; i < n; i++)
		if (rte_eth_bond_8023ad_slave_info(port, members[i], &info) == 0 &&
		    (info.actor_state & STATE_DISTRIBUTING))
			distributing++;
	return distributing;
}

uint16_t tlsdp_eth_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_tx_burst(port, queue, pkts, n);
}

struct rte_mbuf *tlsdp_pktmbuf_alloc(struct rte_mempool *mp)
{
	return rte_pktmbuf_alloc(mp);
}

int tlsdp_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int n)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, n);
}

void tlsdp_pktmbuf_free(struct rte_mbuf *m)
{
	rte_pktmbuf_free(m);
}

unsigned int tlsdp_mempool_avail_count(const struct rte_mempool *mp)
{
	return rte_mempool_avail_count(mp);
}

uint8_t *tlsdp_pktmbuf_data(struct rte_mbuf *m)
{
	return rte_pktmbuf_mtod(m, uint8_t *);
}

uint16_t tlsdp_pktmbuf_data_len(const struct rte_mbuf *m)
{
	return m->data_len;
}

uint32_t tlsdp_pktmbuf_pkt_len(const struct rte_mbuf *m)
{
	return m->pkt_len;
}

uint16_t tlsdp_pktmbuf_nb_segs(const struct rte_mbuf *m)
{
	return m->nb_segs;
}

int tlsdp_pktmbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail)
{
	return rte_pktmbuf_chain(head, tail);
}

uint16_t tlsdp_pktmbuf_capacity(const struct rte_mbuf *m)
{
	return (uint16_t)(m->buf_len - m->data_off);
}

void tlsdp_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len)
{
	m->data_len = len;
	m->pkt_len = len;
}

uint64_t tlsdp_pktmbuf_ol_flags(const struct rte_mbuf *m)
{
	return m->ol_flags;
}

void tlsdp_pktmbuf_set_tx_offload(struct rte_mbuf *m, uint64_t flags, uint8_t l2_len, uint16_t l3_len)
{
	m->ol_flags = flags;
	m->l2_len = l2_len;
	m->l3_len = l3_len;
}

void tlsdp_pktmbuf_copy_offload(struct rte_mbuf *to, const struct rte_mbuf *from)
{
	to->ol_flags = from->ol_flags;
	to->tx_offload = from->tx_offload;
}

void tlsdp_pktmbuf_set_tso(struct rte_mbuf *m, uint64_t flags, uint8_t l2_len, uint16_t l3_len, uint8_t l4_len, uint16_t tso_segsz)
{
	m->ol_flags = flags;
	m->l2_len = l2_len;
	m->l3_len = l3_len;
	m->l4_len = l4_len;
	m->tso_segsz = tso_segsz;
}

void tlsdp_pktmbuf_tx_lens(const struct rte_mbuf *m, uint8_t *l2_len, uint16_t *l3_len, uint8_t *l4_len, uint16_t *tso_segsz)
{
	*l2_len = m->l2_len;
	*l3_len = m->l3_len;
	*l4_len = m->l4_len;
	*tso_segsz = m->tso_segsz;
}

void tlsdp_pktmbuf_set_ol_flags(struct rte_mbuf *m, uint64_t flags)
{
	m->ol_flags = flags;
}

uint32_t tlsdp_pktmbuf_rss_hash(const struct rte_mbuf *m)
{
	return m->hash.rss;
}

uint32_t tlsdp_softrss(const uint32_t *tuple, uint32_t len, const uint8_t *key)
{
	return rte_softrss((uint32_t *)tuple, len, key);
}

int tlsdp_errno(void)
{
	return rte_errno;
}

unsigned int tlsdp_lcore_id(void)
{
	return rte_lcore_id();
}

uint64_t tlsdp_rdtsc(void)
{
	return rte_rdtsc();
}

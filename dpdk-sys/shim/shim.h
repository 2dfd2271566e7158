/*
 * tlsdp's C shim over DPDK: the functions DPDK defines `static inline` (which
 * bindgen cannot link to) and the bit-flag constants built from function-like
 * macros, exported as plain symbols. Every function is a direct call of the
 * DPDK function it names; no logic lives here.
 */
#ifndef TLSDP_SHIM_H
#define TLSDP_SHIM_H

#include <stdint.h>

struct rte_mbuf;
struct rte_mempool;

uint16_t tlsdp_eth_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t tlsdp_eth_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);

/* The members of a bond that carry traffic (in 802.3ad: those the
 * partner aggregates, distributing), or a negative errno. */
int tlsdp_bond_active_members(uint16_t port);

struct rte_mbuf *tlsdp_pktmbuf_alloc(struct rte_mempool *mp);
int tlsdp_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int n);
void tlsdp_pktmbuf_free(struct rte_mbuf *m);
unsigned int tlsdp_mempool_avail_count(const struct rte_mempool *mp);

/* Data pointer (rte_pktmbuf_mtod) and lengths of a single-segment mbuf. */
uint8_t *tlsdp_pktmbuf_data(struct rte_mbuf *m);
uint16_t tlsdp_pktmbuf_data_len(const struct rte_mbuf *m);
uint32_t tlsdp_pktmbuf_pkt_len(const struct rte_mbuf *m);
uint16_t tlsdp_pktmbuf_nb_segs(const struct rte_mbuf *m);
int tlsdp_pktmbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail);
/* Room from the data start to the end of the buffer. */
uint16_t tlsdp_pktmbuf_capacity(const struct rte_mbuf *m);
/* Sets data_len and pkt_len of a single-segment mbuf; len <= capacity. */
void tlsdp_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len);
uint64_t tlsdp_pktmbuf_ol_flags(const struct rte_mbuf *m);
/* Sets ol_flags to `flags` (RTE_MBUF_F_TX_*) and the header lengths the
 * transmit offloads read. */
void tlsdp_pktmbuf_set_tx_offload(struct rte_mbuf *m, uint64_t flags, uint8_t l2_len, uint16_t l3_len);
/* Copies ol_flags and the header lengths of `from` to `to`. */
void tlsdp_pktmbuf_copy_offload(struct rte_mbuf *to, const struct rte_mbuf *from);
void tlsdp_pktmbuf_set_tso(struct rte_mbuf *m, uint64_t flags, uint8_t l2_len, uint16_t l3_len, uint8_t l4_len, uint16_t tso_segsz);
void tlsdp_pktmbuf_tx_lens(const struct rte_mbuf *m, uint8_t *l2_len, uint16_t *l3_len, uint8_t *l4_len, uint16_t *tso_segsz);
void tlsdp_pktmbuf_set_ol_flags(struct rte_mbuf *m, uint64_t flags);
/* The RSS hash the NIC computed (valid when ol_flags has RTE_MBUF_F_RX_RSS_HASH). */
uint32_t tlsdp_pktmbuf_rss_hash(const struct rte_mbuf *m);

/* rte_softrss: the Toeplitz hash of `len` 32-bit words (host order) with
 * `key` (as given to the NIC). */
uint32_t tlsdp_softrss(const uint32_t *tuple, uint32_t len, const uint8_t *key);

int tlsdp_errno(void);
unsigned int tlsdp_lcore_id(void);
uint64_t tlsdp_rdtsc(void);

#endif

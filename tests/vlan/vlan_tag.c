// 802.1Q tagging for the lab's client veth, where the kernel has no 8021q
// module (tests/tests/vlan.rs, docs/vlan.md): a tc program on egress tags
// IPv4 and ARP frames by their destination (192.168.100.0/24: VLAN 100,
// 192.168.200.0/24: VLAN 200, anything else untagged), and one on ingress
// takes the tag off whatever arrives tagged, so the namespace's plain
// addresses on those subnets answer. Built by the test with clang:
//   clang -O2 -target bpf -DTAG -c vlan_tag.c -o tag.o     (egress)
//   clang -O2 -target bpf       -c vlan_tag.c -o untag.o   (ingress)
// and attached with `tc filter add dev veth-cli {egress|ingress} bpf da`.

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifdef TAG
// The VLAN of an IPv4 destination (0: untagged).
static __always_inline int vlan_of(__u32 ip)
{
	if ((ip & 0xffffff00) == 0xc0a86400)
		return 100;
	if ((ip & 0xffffff00) == 0xc0a8c800)
		return 200;
	return 0;
}

SEC("tc")
int tag(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	__u32 ip;

	if (data + ETH_HLEN > end)
		return TC_ACT_OK;
	__u16 proto = *(__u16 *)(data + 12);
	if (proto == bpf_htons(ETH_P_IP)) {
		if (data + ETH_HLEN + 20 > end)
			return TC_ACT_OK;
		ip = bpf_ntohl(*(__u32 *)(data + ETH_HLEN + 16)); // destination
	} else if (proto == bpf_htons(ETH_P_ARP)) {
		if (data + ETH_HLEN + 28 > end)
			return TC_ACT_OK;
		ip = bpf_ntohl(*(__u32 *)(data + ETH_HLEN + 24)); // target address
	} else {
		return TC_ACT_OK;
	}
	int vid = vlan_of(ip);
	if (vid)
		bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q), vid);
	return TC_ACT_OK;
}
#else
SEC("tc")
int untag(struct __sk_buff *skb)
{
	// The kernel moved a received tag into the packet's metadata before
	// tc ingress; without a VLAN device it would drop the packet.
	if (skb->vlan_present)
		bpf_skb_vlan_pop(skb);
	return TC_ACT_OK;
}
#endif

char _license[] SEC("license") = "GPL";

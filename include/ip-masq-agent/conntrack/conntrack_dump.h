// SPDX-License-Identifier: Apache-2.0
// Conntrack's entries over ctnetlink, as far as source NAT goes: one dump, filtered in
// the kernel to source-NATed entries where the kernel can, each entry parsed and handed
// on at once (nothing of the dump is kept).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/base/error.h"

struct nlmsghdr;

namespace ipmasq {

// One conntrack entry, as far as source NAT goes. For ICMP the "ports" are the echo
// identifier (original source, reply destination) and 0.
struct ConntrackEntry {
	Family family = Family::ipv4;
	uint8_t protocol = 0;
	bool sourceNat = false; // IPS_SRC_NAT: some rule translated its source
	Address originalSource;
	uint16_t originalSourcePort = 0;
	// The reply tuple: its source is where the connection goes (after any DNAT), its
	// destination the translated source.
	Address destination;
	uint16_t destinationPort = 0;
	Address translatedSource;
	uint16_t translatedPort = 0;
	// TCP's state as conntrack tracks it (CTA_PROTOINFO_TCP_STATE, a TCP_CONNTRACK_* of
	// linux/netfilter/nf_conntrack_tcp.h); nullopt for other protocols, or when the kernel
	// sent none.
	std::optional<uint8_t> tcpState;
};

} // namespace ipmasq

namespace ipmasq::netlink {

// One entry message of a dump (IPCTNL_MSG_CT_NEW). nullopt: an entry this does not
// describe (a family other than IPv4 and IPv6, a tuple without addresses or protocol),
// which the caller skips; an error: a message whose attributes overrun it or have the
// wrong size. Reads nothing beyond nlh->nlmsg_len. Pure: the fuzz target
// fuzz_conntrack_entry feeds it arbitrary bytes.
Result<std::optional<ConntrackEntry>> parseConntrackEntry(const nlmsghdr *nlh);

struct ConntrackDump {
	uint64_t messages = 0; // entries the kernel sent
	uint64_t skipped = 0; // of which parseConntrackEntry described none
	// The kernel applied the status filter (its messages carry NLM_F_DUMP_FILTERED): it
	// sent source-NATed entries only. Kernels before the filter on dumps (CTA_STATUS in
	// a dump request, ctnetlink_filter_parse_status) ignore the attribute and send every
	// entry; the caller checks the status bit of each entry in any case.
	bool kernelFiltered = false;
};

// Dumps the source-NATed entries of both families over a NETLINK_NETFILTER socket of its
// own, handing each to `onEntry` as it is parsed. Needs CAP_NET_ADMIN (EPERM otherwise,
// with a message that says so). Each datagram must come within 1 s (ETIMEDOUT). A
// malformed entry ends the dump with an error (EPROTO).
Result<ConntrackDump> dumpSourceNatEntries(const std::function<void(const ConntrackEntry &)> &onEntry);

} // namespace ipmasq::netlink

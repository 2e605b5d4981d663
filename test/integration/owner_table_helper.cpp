// SPDX-License-Identifier: Apache-2.0
// Test helper: takes table inet NAME with the flag "owner" (NFT_TABLE_F_OWNER), replacing
// whatever table of that name was there, prints "owned" and holds it until its stdin
// closes. While it lives, the kernel refuses every change to the table from any other
// socket (EPERM); when it exits, the kernel removes the table, without a notification.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <unistd.h>

#include <libmnl/libmnl.h>
#include <libnftnl/common.h>
#include <libnftnl/table.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

namespace {

void addTable(mnl_nlmsg_batch *batch, uint16_t type, const char *name, uint32_t flags,
	      uint16_t nlFlags, uint32_t &seq)
{
	nftnl_table *table = nftnl_table_alloc();
	nftnl_table_set_str(table, NFTNL_TABLE_NAME, name);
	nftnl_table_set_u32(table, NFTNL_TABLE_FAMILY, NFPROTO_INET);
	if (flags != 0)
		nftnl_table_set_u32(table, NFTNL_TABLE_FLAGS, flags);
	nlmsghdr *nlh = nftnl_nlmsg_build_hdr(static_cast<char *>(mnl_nlmsg_batch_current(batch)),
					      type, NFPROTO_INET, nlFlags | NLM_F_ACK, seq++);
	nftnl_table_nlmsg_build_payload(nlh, table);
	nftnl_table_free(table);
	mnl_nlmsg_batch_next(batch);
}

} // namespace

int main(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : "ip-masq-agent";
	mnl_socket *nl = mnl_socket_open(NETLINK_NETFILTER);
	if (nl == nullptr || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		std::perror("netlink");
		return 1;
	}
	static char buf[16384];
	uint32_t seq = static_cast<uint32_t>(std::time(nullptr));
	mnl_nlmsg_batch *batch = mnl_nlmsg_batch_start(buf, sizeof(buf));
	nftnl_batch_begin(static_cast<char *>(mnl_nlmsg_batch_current(batch)), seq++);
	mnl_nlmsg_batch_next(batch);
	// Create-if-missing, delete, create owned: whatever was there is replaced.
	addTable(batch, NFT_MSG_NEWTABLE, name, 0, NLM_F_CREATE, seq);
	addTable(batch, NFT_MSG_DELTABLE, name, 0, 0, seq);
	addTable(batch, NFT_MSG_NEWTABLE, name, NFT_TABLE_F_OWNER, NLM_F_CREATE | NLM_F_EXCL, seq);
	nftnl_batch_end(static_cast<char *>(mnl_nlmsg_batch_current(batch)), seq++);
	mnl_nlmsg_batch_next(batch);
	if (mnl_socket_sendto(nl, mnl_nlmsg_batch_head(batch), mnl_nlmsg_batch_size(batch)) < 0) {
		std::perror("sendto");
		return 1;
	}
	mnl_nlmsg_batch_stop(batch);
	// Three acknowledgements; an error in any of them fails the whole batch.
	const unsigned portId = mnl_socket_get_portid(nl);
	for (int acks = 0; acks < 3; acks++) {
		const ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
		if (n < 0 || mnl_cb_run(buf, static_cast<size_t>(n), 0, portId, nullptr, nullptr) < 0) {
			std::fprintf(stderr, "taking table inet %s: %s\n", name, std::strerror(errno));
			return 1;
		}
	}
	std::printf("owned %u\n", portId);
	std::fflush(stdout);
	// Hold the socket (and so the table) until stdin closes.
	char ignored[256];
	for (;;) {
		const ssize_t n = read(STDIN_FILENO, ignored, sizeof(ignored));
		if (n == 0 || (n < 0 && errno != EINTR))
			break;
	}
	mnl_socket_close(nl);
	return 0;
}

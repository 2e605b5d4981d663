// SPDX-License-Identifier: Apache-2.0
// The HTTP endpoint with Boost.Beast: one I/O thread, asynchronous sessions with timeouts.
#include "ip-masq-agent/health_server.h"

#include <charconv>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "ip-masq-agent/escape.h"
#include "ip-masq-agent/log.h"

namespace ipmasq {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

Result<ListenAddress> parseListenAddress(std::string_view text)
{
	const auto invalid = [&](std::string_view why) {
		return fail(fmt::format("--health-addr {}: {} (write host:port, :port or "
					"[ipv6]:port, e.g. \"{}\"; an empty value turns it off)",
					quoted(text), why, kDefaultHealthAddr));
	};
	const size_t colon = text.rfind(':');
	if (colon == std::string_view::npos)
		return invalid("no port");
	std::string_view host = text.substr(0, colon);
	const std::string_view portText = text.substr(colon + 1);
	if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
		host = host.substr(1, host.size() - 2);
	else if (host.find(':') != std::string_view::npos)
		return invalid("an IPv6 address needs brackets");

	unsigned port = 0;
	const auto [end, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
	if (portText.empty() || ec != std::errc() || end != portText.data() + portText.size() ||
	    port > 65535)
		return invalid("the port is not a number from 0 to 65535");
	if (host.find('\0') != std::string_view::npos)
		return invalid("the host holds a NUL byte");
	ListenAddress address{std::string(host), static_cast<uint16_t>(port)};
	if (!address.host.empty()) {
		boost::system::error_code error;
		asio::ip::make_address(address.host, error);
		if (error)
			return invalid(fmt::format("{} is not an IP address", quoted(address.host)));
	}
	return address;
}

namespace {

constexpr auto kClientTimeout = std::chrono::seconds(5);

// One request per connection: probes and scrapes are small and infrequent.
class Session : public std::enable_shared_from_this<Session>
{
public:
	Session(tcp::socket socket, const AgentStatus &status, std::shared_ptr<int> count)
		: stream_(std::move(socket)), status_(status), count_(std::move(count)) {}

	void start()
	{
		stream_.expires_after(kClientTimeout);
		http::async_read(stream_, buffer_, request_,
				 [self = shared_from_this()](beast::error_code ec, size_t) {
					 if (!ec)
						 self->respond();
				 });
	}

private:
	// 200 "ok", or 503 with the reason.
	void answerHealth(const AgentStatus::Health &health)
	{
		response_.result(health.ok ? http::status::ok : http::status::service_unavailable);
		response_.body() = health.ok ? "ok\n" : health.reason + "\n";
	}

	void respond()
	{
		response_.version(request_.version());
		response_.keep_alive(false);
		response_.set(http::field::server, "ip-masq-agent");
		response_.set(http::field::content_type, "text/plain; charset=utf-8");
		const bool get = request_.method() == http::verb::get;
		const bool head = request_.method() == http::verb::head;
		const std::string_view target(request_.target().data(), request_.target().size());
		const std::string_view path = target.substr(0, target.find('?'));
		if (!get && !head) {
			response_.result(http::status::method_not_allowed);
			response_.set(http::field::allow, "GET, HEAD");
			response_.body() = "only GET and HEAD\n";
		} else if (path == "/livez") {
			// Only the heartbeat's atomic: never waits for the loop, which is what it
			// judges.
			answerHealth(status_.liveness(AgentStatus::Clock::now()));
		} else if (path == "/readyz" || path == "/healthz") {
			// /healthz is /readyz under its old name, for existing scripts.
			answerHealth(status_.health());
		} else if (path == "/metrics") {
			response_.result(http::status::ok);
			response_.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
			response_.body() = status_.prometheusText();
		} else {
			response_.result(http::status::not_found);
			response_.body() = "not found: try /livez, /readyz, /healthz or /metrics\n";
		}
		response_.prepare_payload();
		if (head)
			response_.body().clear(); // Content-Length stays that of the GET body
		stream_.expires_after(kClientTimeout);
		http::async_write(stream_, response_,
				  [self = shared_from_this()](beast::error_code, size_t) {
					  beast::error_code ignored;
					  self->stream_.socket().shutdown(tcp::socket::shutdown_send,
									 ignored);
				  });
	}

	beast::tcp_stream stream_;
	beast::flat_buffer buffer_;
	http::request<http::string_body> request_;
	http::response<http::string_body> response_;
	const AgentStatus &status_;
	std::shared_ptr<int> count_; // held while the session lives
};

} // namespace

struct HealthServer::Impl {
	Impl(const AgentStatus &s) : status(s) {}

	void accept()
	{
		acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
			if (ec == asio::error::operation_aborted)
				return;
			if (ec) {
				// Out of descriptors or the like: retry later, never spin.
				retry.expires_after(std::chrono::milliseconds(100));
				retry.async_wait([this](beast::error_code waited) {
					if (!waited)
						accept();
				});
				return;
			}
			// Probes and scrapes need a few connections at most; anything beyond
			// the cap is closed at once rather than held for its timeout.
			if (sessions.use_count() <= kMaxSessions)
				std::make_shared<Session>(std::move(socket), status, sessions)->start();
			accept();
		});
	}

	static constexpr long kMaxSessions = 16;

	const AgentStatus &status;
	uint16_t port = 0; // the bound port, recorded before the I/O thread starts
	asio::io_context io{1};
	tcp::acceptor acceptor{io};
	asio::steady_timer retry{io};
	// Each live session holds a copy: use_count() - 1 sessions are open.
	std::shared_ptr<int> sessions = std::make_shared<int>(0);
	std::thread thread;
};

namespace {

// ":port" means every address: IPv6 and IPv4 on one dual-stack socket where the node
// has IPv6 (the kubelet probes an IPv6-only node on its IPv6 address), IPv4 otherwise.
boost::system::error_code openAndBind(tcp::acceptor &acceptor, const ListenAddress &address)
{
	boost::system::error_code ec;
	const auto bindTo = [&](const asio::ip::address &ip, bool dualStack) {
		ec.clear();
		const tcp::endpoint endpoint(ip, address.port);
		acceptor.open(endpoint.protocol(), ec);
		if (!ec && dualStack)
			acceptor.set_option(asio::ip::v6_only(false), ec);
		if (!ec)
			acceptor.set_option(asio::socket_base::reuse_address(true), ec);
		if (!ec)
			acceptor.bind(endpoint, ec);
		if (!ec)
			acceptor.listen(asio::socket_base::max_listen_connections, ec);
		if (ec && acceptor.is_open()) {
			boost::system::error_code ignored;
			acceptor.close(ignored);
		}
	};
	if (!address.host.empty()) {
		bindTo(asio::ip::make_address(address.host), false);
		return ec;
	}
	bindTo(asio::ip::address_v6::any(), true);
	if (ec == asio::error::address_family_not_supported ||
	    ec == boost::system::errc::address_not_available)
		bindTo(asio::ip::address_v4::any(), false);
	return ec;
}

} // namespace

Result<std::unique_ptr<HealthServer>> HealthServer::start(const ListenAddress &address,
							  const AgentStatus &status)
{
	auto impl = std::make_unique<Impl>(status);
	if (const auto ec = openAndBind(impl->acceptor, address))
		return fail(fmt::format("cannot serve /healthz, /livez, /readyz and /metrics on {}:{}: "
					"{} (choose another --health-addr, or turn it off with "
					"--health-addr=)",
					address.host.empty() ? "*" : address.host, address.port,
					ec.message()), ec.value());
	// Read here, once: from now on only the I/O thread touches the acceptor.
	boost::system::error_code ec;
	impl->port = impl->acceptor.local_endpoint(ec).port();
	if (ec)
		return fail(fmt::format("cannot tell the health endpoint's port: {}", ec.message()),
			    ec.value());
	impl->accept();
	Impl *raw = impl.get();
	impl->thread = std::thread([raw] {
		// Nothing here may throw across the thread's edge: log and stop serving.
		try {
			raw->io.run();
		} catch (const std::exception &e) {
			log::error("the health endpoint stopped: {}", e.what());
		}
	});
	return std::unique_ptr<HealthServer>(new HealthServer(std::move(impl)));
}

HealthServer::HealthServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HealthServer::~HealthServer()
{
	impl_->io.stop();
	if (impl_->thread.joinable())
		impl_->thread.join();
}

uint16_t HealthServer::port() const
{
	return impl_->port;
}

} // namespace ipmasq

/*
 * probe-c: rdmad's loopback probe (verbs/loopback) as a minimal C program, for
 * docs/BENCHMARKS.md (#18 item 3): the same verbs sequence on the same port,
 * so that rdmad's probe RTT divided by this program's RTT is rdmad's own
 * overhead (Go, cgo, its scheduler) apart from the provider's.
 *
 * It mirrors verbs/loopback/session.go step by step:
 *   - one mmap'ed page cut into 512-byte slots, one MR (local write, remote
 *     write, remote read), one completion channel (non-blocking fd), one CQ of
 *     16 entries on it, two RC QPs (4 send and 4 receive WRs, 1 SGE, no
 *     inline, sq_sig_all 0) sharing the CQ;
 *   - INIT (pkey 0), RTR to each other (path MTU min(active, 1024), PSN 0,
 *     max_dest_rd_atomic 1, min_rnr_timer 12, GRH with the chosen GID, hop
 *     limit 64, traffic class 0 unless -t), RTS (PSN 0, timeout 14, retry 7,
 *     rnr_retry 7, max_rd_atomic 1);
 *   - a round every interval (an absolute-time tick, like Go's ticker): a
 *     warm-up RDMA WRITE, an RDMA WRITE, an RDMA READ (each signalled,
 *     payload filled, destination cleared, data checked), then SEND/RECV (B
 *     posts a receive, A sends; both completions counted), one deadline of
 *     timeout for the round;
 *   - the completion wait of rdmad's CQ.PollWait: poll the CQ, reading the
 *     clock every 32 polls, for up to the spin (1 ms; with -b, "busy", up to
 *     min(100 ms, timeout)); then ibv_req_notify_cq, poll once more, and
 *     sleep on the channel's fd (poll(2) up to the round's deadline, then
 *     ibv_get_cq_event + ibv_ack_cq_events), and poll again;
 *   - an RTT is the time from just before ibv_post_send to the last
 *     completion (CLOCK_MONOTONIC, as Go's time.Now), and percentiles are
 *     nearest-rank over the last -W rounds (rdmad's window, 300).
 *
 * Build: cc -O2 -Wall -o probe-c probe.c -libverbs
 * Usage: probe-c [-d DEV] [-i PORT] [-x GID_INDEX] [-n ROUNDS] [-W WINDOW]
 *                [-I INTERVAL_US] [-T TIMEOUT_US] [-s PAYLOAD] [-t TCLASS] [-b]
 *                [-S] [-Q]
 * -S adds a neighbour thread that behaves like the Go runtime's sysmon woken
 * by a round's first cgo call; -Q queries the port before every round, as
 * rdmad does. Neither is in the timed interval; both are for finding what
 * else than the probe's verbs makes rdmad's figures differ.
 * Prints one line starting "probe-c:" with the p50/p99/max of each operation
 * in nanoseconds (key=value pairs); exits 1 on any failure with the verb and
 * the reason.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { OP_WRITE, OP_READ, OP_SEND, OP_WARMUP, NUM_OPS };
static const char *op_names[NUM_OPS] = {"write", "read", "send", "warmup"};

enum { SLOT_SIZE = 512 };
enum { SLOT_WRITE_SRC, SLOT_WRITE_DST, SLOT_READ_SRC, SLOT_READ_DST, SLOT_SEND_SRC, SLOT_RECV_DST, NUM_SLOTS };

struct probe {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	uint8_t *mem;
	int payload;
	int64_t spin_ns;
	struct ibv_wc wcs[4];
};

static void die(const char *what, int err) {
	fprintf(stderr, "probe-c: %s: %s\n", what, strerror(err ? err : EIO));
	exit(1);
}

static int64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint8_t *slot(struct probe *p, int i) { return p->mem + i * SLOT_SIZE; }

/* fill writes the pattern of rdmad's fill(b, seq, op). */
static void fill(uint8_t *b, int n, uint64_t seq, int op) {
	for (int i = 0; i < n; i++)
		b[i] = i < 8 ? (uint8_t)(seq >> (8 * i)) : (uint8_t)((uint64_t)i * 7 + seq * 131 + (uint64_t)op * 29 + 1);
}

static int check(const uint8_t *b, int n, uint64_t seq, int op) {
	uint8_t want[SLOT_SIZE];
	fill(want, n, seq, op);
	return memcmp(b, want, n) == 0;
}

static uint64_t wrid(uint64_t seq, int op) { return seq << 4 | (uint64_t)op; }

/* poll_wait returns at least one completion in p->wcs, as CQ.PollWait does:
 * poll for up to the spin, then arm, poll, sleep on the channel. 0: the
 * round's deadline passed. */
static int poll_wait(struct probe *p, int64_t deadline) {
	int64_t spin_end = p->spin_ns > 0 ? now_ns() + p->spin_ns : 0;
	for (int i = 1;; i++) {
		int n = ibv_poll_cq(p->cq, 4, p->wcs);
		if (n != 0)
			return n;
		if (p->spin_ns > 0 && (i % 32 != 0 || now_ns() < spin_end))
			continue;
		if (ibv_req_notify_cq(p->cq, 0))
			die("ibv_req_notify_cq", errno);
		if ((n = ibv_poll_cq(p->cq, 4, p->wcs)) != 0)
			return n;
		for (;;) {
			int64_t left = deadline - now_ns();
			if (left <= 0)
				return 0;
			struct pollfd pfd = {.fd = p->ch->fd, .events = POLLIN};
			int r = poll(&pfd, 1, (int)((left + 999999) / 1000000));
			if (r < 0 && errno != EINTR)
				die("poll on the completion channel", errno);
			struct ibv_cq *cq;
			void *cq_ctx;
			if (r > 0 && ibv_get_cq_event(p->ch, &cq, &cq_ctx) == 0) {
				ibv_ack_cq_events(cq, 1);
				break;
			}
			if (r > 0 && errno != EAGAIN)
				die("ibv_get_cq_event", errno);
		}
	}
}

/* op posts one request (post_recv first for SEND) and waits for want
 * completions of this round; it returns the RTT in ns. */
static int64_t op(struct probe *p, int opn, uint64_t seq, int want, struct ibv_send_wr *wr, int64_t deadline) {
	struct ibv_send_wr *bad = NULL;
	int64_t start = now_ns();
	int r = ibv_post_send(p->a, wr, &bad);
	if (r)
		die("ibv_post_send", r);
	for (int got = 0; got < want;) {
		int n = poll_wait(p, deadline);
		if (n < 0)
			die("ibv_poll_cq", EIO);
		if (n == 0) {
			fprintf(stderr, "probe-c: %s: no completion within the round's timeout\n", op_names[opn]);
			exit(1);
		}
		for (int i = 0; i < n; i++) {
			if (p->wcs[i].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "probe-c: %s: completion %s\n", op_names[opn], ibv_wc_status_str(p->wcs[i].status));
				exit(1);
			}
			if (p->wcs[i].wr_id >> 4 != seq || (int)(p->wcs[i].wr_id & 7) != opn) {
				fprintf(stderr, "probe-c: %s: unexpected completion %#llx (round %llu)\n", op_names[opn],
					(unsigned long long)p->wcs[i].wr_id, (unsigned long long)seq);
				exit(1);
			}
			got++;
		}
	}
	return now_ns() - start;
}

static void round_(struct probe *p, uint64_t seq, int64_t timeout_ns, int64_t rtt[NUM_OPS]) {
	int64_t deadline = now_ns() + timeout_ns;
	static const struct {
		int op;
		enum ibv_wr_opcode opcode;
		int local, remote, from, to;
	} ones[] = {
		{OP_WARMUP, IBV_WR_RDMA_WRITE, SLOT_WRITE_SRC, SLOT_WRITE_DST, SLOT_WRITE_SRC, SLOT_WRITE_DST},
		{OP_WRITE, IBV_WR_RDMA_WRITE, SLOT_WRITE_SRC, SLOT_WRITE_DST, SLOT_WRITE_SRC, SLOT_WRITE_DST},
		{OP_READ, IBV_WR_RDMA_READ, SLOT_READ_DST, SLOT_READ_SRC, SLOT_READ_SRC, SLOT_READ_DST},
	};
	for (size_t k = 0; k < sizeof ones / sizeof ones[0]; k++) {
		fill(slot(p, ones[k].from), p->payload, seq, ones[k].op);
		memset(slot(p, ones[k].to), 0, p->payload);
		struct ibv_sge sge = {.addr = (uintptr_t)slot(p, ones[k].local), .length = p->payload, .lkey = p->mr->lkey};
		struct ibv_send_wr wr;
		memset(&wr, 0, sizeof wr);
		wr.wr_id = wrid(seq, ones[k].op);
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = ones[k].opcode;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.rdma.remote_addr = (uintptr_t)slot(p, ones[k].remote);
		wr.wr.rdma.rkey = p->mr->rkey;
		rtt[ones[k].op] = op(p, ones[k].op, seq, 1, &wr, deadline);
		if (!check(slot(p, ones[k].to), p->payload, seq, ones[k].op)) {
			fprintf(stderr, "probe-c: %s: data mismatch in round %llu\n", op_names[ones[k].op], (unsigned long long)seq);
			exit(1);
		}
	}
	fill(slot(p, SLOT_SEND_SRC), p->payload, seq, OP_SEND);
	memset(slot(p, SLOT_RECV_DST), 0, p->payload);
	struct ibv_sge rsge = {.addr = (uintptr_t)slot(p, SLOT_RECV_DST), .length = p->payload, .lkey = p->mr->lkey};
	struct ibv_recv_wr rwr, *rbad = NULL;
	memset(&rwr, 0, sizeof rwr);
	rwr.wr_id = wrid(seq, OP_SEND) | 1 << 3;
	rwr.sg_list = &rsge;
	rwr.num_sge = 1;
	int r = ibv_post_recv(p->b, &rwr, &rbad);
	if (r)
		die("ibv_post_recv", r);
	struct ibv_sge sge = {.addr = (uintptr_t)slot(p, SLOT_SEND_SRC), .length = p->payload, .lkey = p->mr->lkey};
	struct ibv_send_wr wr;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wrid(seq, OP_SEND);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	rtt[OP_SEND] = op(p, OP_SEND, seq, 2, &wr, deadline);
	if (!check(slot(p, SLOT_RECV_DST), p->payload, seq, OP_SEND)) {
		fprintf(stderr, "probe-c: send: data mismatch in round %llu\n", (unsigned long long)seq);
		exit(1);
	}
}

/* pick_gid ranks the port's GIDs as verbs.PickGID does: on Ethernet, RoCE v2
 * IPv4-mapped first, then RoCE v2, then RoCE v1; the lowest index wins a tie. */
static int pick_gid(struct ibv_context *ctx, int port, int table_len, int ethernet) {
	int best = -1, best_rank = 0;
	for (int i = 0; i < table_len; i++) {
		struct ibv_gid_entry e;
		if (ibv_query_gid_ex(ctx, port, i, &e, 0))
			continue;
		int zero = 1;
		for (int k = 0; k < 16; k++)
			zero &= e.gid.raw[k] == 0;
		if (zero)
			continue;
		int rank = 0;
		if (!ethernet)
			rank = e.gid_type == IBV_GID_TYPE_IB;
		else if (e.gid_type == IBV_GID_TYPE_ROCE_V2) {
			int v4 = e.gid.raw[10] == 0xff && e.gid.raw[11] == 0xff;
			for (int k = 0; k < 10; k++)
				v4 &= e.gid.raw[k] == 0;
			rank = v4 ? 4 : 3;
		} else if (e.gid_type == IBV_GID_TYPE_ROCE_V1)
			rank = 2;
		else if (e.gid_type == IBV_GID_TYPE_IB)
			rank = 1;
		if (rank > best_rank) {
			best = i;
			best_rank = rank;
		}
	}
	return best;
}

static int cmp64(const void *a, const void *b) {
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* With -S, a neighbour thread does what the Go runtime's sysmon does when a
 * cgo call (a system call to the runtime) wakes it from its deep sleep: it
 * looks at the Ps every 20 us, 50 times, before it backs off. It is woken
 * at the start of every round, as rdmad's first cgo call of a round wakes
 * sysmon after 10 ms of an idle process. */
static sem_t neighbour_go;

static void *neighbour(void *arg) {
	(void)arg;
	for (;;) {
		while (sem_wait(&neighbour_go) != 0)
			;
		for (int i = 0; i < 50; i++)
			usleep(20);
	}
	return NULL;
}

/* rank is rdmad's nearest-rank index (window.go). */
static int rank_of(int n, double q) {
	int r = ((int)(q * 1000) * n + 999) / 1000;
	return (r < 1 ? 1 : r) - 1;
}

int main(int argc, char **argv) {
	const char *dev = "rxe0";
	int port = 1, gid_index = -1, rounds = 400, window = 300, payload = 64, tclass = 0, busy = 0, sysmon = 0, query = 0;
	int64_t interval_ns = 10 * 1000000LL, timeout_ns = 500 * 1000000LL;
	int c;
	while ((c = getopt(argc, argv, "d:i:x:n:W:I:T:s:t:bSQ")) != -1) {
		switch (c) {
		case 'd': dev = optarg; break;
		case 'i': port = atoi(optarg); break;
		case 'x': gid_index = atoi(optarg); break;
		case 'n': rounds = atoi(optarg); break;
		case 'W': window = atoi(optarg); break;
		case 'I': interval_ns = atoll(optarg) * 1000; break;
		case 'T': timeout_ns = atoll(optarg) * 1000; break;
		case 's': payload = atoi(optarg); break;
		case 't': tclass = atoi(optarg); break;
		case 'b': busy = 1; break;
		case 'S': sysmon = 1; break;
		case 'Q': query = 1; break;
		default:
			fprintf(stderr, "usage: probe-c [-d DEV] [-i PORT] [-x GID_INDEX] [-n ROUNDS] [-W WINDOW] [-I INTERVAL_US] [-T TIMEOUT_US] [-s PAYLOAD] [-t TCLASS] [-b] [-S] [-Q]\n");
			return 2;
		}
	}
	if (rounds < 1 || window < 1 || payload < 8 || payload > SLOT_SIZE || interval_ns <= 0 || timeout_ns <= 0) {
		fprintf(stderr, "probe-c: rounds and window must be >= 1, payload 8..%d, interval and timeout > 0\n", SLOT_SIZE);
		return 2;
	}
	if (window > rounds)
		window = rounds;
	if (timeout_ns > interval_ns) /* rdmad: the timeout is at most the interval */
		timeout_ns = interval_ns;

	struct probe p = {.payload = payload};
	/* rdmad's busy mode spins up to min(BusySpinLimit, timeout); event mode 1 ms. */
	p.spin_ns = busy ? (timeout_ns < 100000000LL ? timeout_ns : 100000000LL) : 1000000LL;

	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		die("ibv_get_device_list", errno);
	for (int i = 0; i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), dev) == 0)
			p.ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!p.ctx) {
		fprintf(stderr, "probe-c: device %s not found or not openable\n", dev);
		return 1;
	}
	struct ibv_port_attr pa;
	if ((c = ibv_query_port(p.ctx, port, &pa)))
		die("ibv_query_port", c);
	if (pa.state != IBV_PORT_ACTIVE) {
		fprintf(stderr, "probe-c: %s port %d is not ACTIVE\n", dev, port);
		return 1;
	}
	int ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
	if (gid_index < 0)
		gid_index = pick_gid(p.ctx, port, pa.gid_tbl_len, ethernet);
	if (gid_index < 0 && ethernet) {
		fprintf(stderr, "probe-c: %s port %d has no usable GID\n", dev, port);
		return 1;
	}
	union ibv_gid gid;
	memset(&gid, 0, sizeof gid);
	if (gid_index >= 0 && (c = ibv_query_gid(p.ctx, port, gid_index, &gid)))
		die("ibv_query_gid", c);

	long page = sysconf(_SC_PAGESIZE);
	size_t len = (SLOT_SIZE * NUM_SLOTS + page - 1) / page * page;
	p.mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p.mem == MAP_FAILED)
		die("mmap", errno);
	if (!(p.pd = ibv_alloc_pd(p.ctx)))
		die("ibv_alloc_pd", errno);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (!(p.mr = ibv_reg_mr(p.pd, p.mem, SLOT_SIZE * NUM_SLOTS, access)))
		die("ibv_reg_mr", errno);
	if (!(p.ch = ibv_create_comp_channel(p.ctx)))
		die("ibv_create_comp_channel", errno);
	int fl = fcntl(p.ch->fd, F_GETFL);
	if (fl < 0 || fcntl(p.ch->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		die("fcntl O_NONBLOCK on the completion channel", errno);
	if (!(p.cq = ibv_create_cq(p.ctx, 16, NULL, p.ch, 0)))
		die("ibv_create_cq", errno);
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof ia);
	ia.qp_type = IBV_QPT_RC;
	ia.send_cq = ia.recv_cq = p.cq;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	if (!(p.a = ibv_create_qp(p.pd, &ia)) || !(p.b = ibv_create_qp(p.pd, &ia)))
		die("ibv_create_qp", errno);
	struct ibv_qp *pairs[2][2] = {{p.a, p.b}, {p.b, p.a}};
	for (int k = 0; k < 2; k++) {
		struct ibv_qp *q = pairs[k][0], *peer = pairs[k][1];
		struct ibv_qp_attr a;
		memset(&a, 0, sizeof a);
		a.qp_state = IBV_QPS_INIT;
		a.port_num = port;
		a.qp_access_flags = access;
		if ((c = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
			die("ibv_modify_qp RESET->INIT", c);
		memset(&a, 0, sizeof a);
		a.qp_state = IBV_QPS_RTR;
		a.path_mtu = pa.active_mtu < IBV_MTU_1024 ? pa.active_mtu : IBV_MTU_1024;
		a.dest_qp_num = peer->qp_num;
		a.rq_psn = 0;
		a.max_dest_rd_atomic = 1;
		a.min_rnr_timer = 12;
		a.ah_attr.port_num = port;
		a.ah_attr.dlid = pa.lid;
		if (ethernet) { /* rdmad: a GRH unless the link layer is InfiniBand */
			a.ah_attr.is_global = 1;
			a.ah_attr.grh.dgid = gid;
			a.ah_attr.grh.sgid_index = gid_index;
			a.ah_attr.grh.hop_limit = 64;
			a.ah_attr.grh.traffic_class = tclass;
		}
		if ((c = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
			die("ibv_modify_qp INIT->RTR", c);
		memset(&a, 0, sizeof a);
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 0;
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		if ((c = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)))
			die("ibv_modify_qp RTR->RTS", c);
	}

	int64_t *samples[NUM_OPS];
	for (int o = 0; o < NUM_OPS; o++)
		if (!(samples[o] = calloc(rounds, sizeof(int64_t))))
			die("calloc", ENOMEM);
	if (sysmon) {
		pthread_t th;
		if (sem_init(&neighbour_go, 0, 0))
			die("sem_init", errno);
		if ((c = pthread_create(&th, NULL, neighbour, NULL)))
			die("pthread_create", c);
	}
	/* The first round runs at once, like rdmad's first; then one per tick. */
	struct timespec tick;
	clock_gettime(CLOCK_MONOTONIC, &tick);
	for (int r = 0; r < rounds; r++) {
		int64_t rtt[NUM_OPS];
		if (sysmon)
			sem_post(&neighbour_go);
		if (query) { /* rdmad looks at the port before every round */
			struct ibv_port_attr qa;
			if ((c = ibv_query_port(p.ctx, port, &qa)))
				die("ibv_query_port", c);
		}
		round_(&p, (uint64_t)r + 1, timeout_ns, rtt);
		for (int o = 0; o < NUM_OPS; o++)
			samples[o][r] = rtt[o];
		tick.tv_nsec += interval_ns % 1000000000;
		tick.tv_sec += interval_ns / 1000000000 + tick.tv_nsec / 1000000000;
		tick.tv_nsec %= 1000000000;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &tick, NULL) == EINTR)
			;
	}

	printf("probe-c: dev=%s port=%d gid_index=%d poll=%s sysmon=%d query=%d rounds=%d window=%d interval_us=%lld", dev, port, gid_index,
		busy ? "busy" : "event", sysmon, query, rounds, window, (long long)(interval_ns / 1000));
	for (int o = 0; o < NUM_OPS; o++) {
		int64_t *s = samples[o] + (rounds - window);
		qsort(s, window, sizeof *s, cmp64);
		printf(" %s_p50_ns=%lld %s_p99_ns=%lld %s_max_ns=%lld", op_names[o], (long long)s[rank_of(window, 0.50)],
			op_names[o], (long long)s[rank_of(window, 0.99)], op_names[o], (long long)s[window - 1]);
	}
	printf("\n");
	ibv_destroy_qp(p.b);
	ibv_destroy_qp(p.a);
	ibv_destroy_cq(p.cq);
	ibv_destroy_comp_channel(p.ch);
	ibv_dereg_mr(p.mr);
	ibv_dealloc_pd(p.pd);
	ibv_close_device(p.ctx);
	return 0;
}

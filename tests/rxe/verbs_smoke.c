/*
 * verbs_smoke.c - build/tests/verbs-smoke: the verbs fabric backend against a real RDMA device
 * (Soft-RoCE in the guest: tests/rxe/verbs-smoke.sh), in one process: nodes 0 and 1 of a
 * cluster, each with its listener; one endpoint of node 0 WRITEs and READs back a 5000-byte
 * buffer (registered for the request) and a 100-byte one (through the bounce buffer), and makes a
 * CAS that succeeds and one that fails, on node 1 and on node 0 itself (through the NIC, as the
 * engine does). Exit status 0 when everything read back is what was written.
 *
 *   verbs-smoke [IP]     (default 10.77.0.1; ports 7000 and 7001)
 *
 * test_fabric's suite runs on verbs only in part (tests that open a node and then fork another
 * node process inherit librdmacm's device contexts, which do not survive fork).
 */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include "fabric/fabric.h"
static int ex(struct fab_ep *ep, enum fab_opcode op, uint32_t node, enum fab_region r, uint64_t off, void *buf, uint32_t len, uint64_t cmp, uint64_t swp) {
    struct fab_wr wr = {.opcode = op, .node = node, .region = r, .offset = off, .local = buf, .length = len, .compare = cmp, .swap = swp};
    return fab_exec(ep, &wr);
}
int main(int argc, char **argv) {
    const char *ip = argc > 1 ? argv[1] : "10.77.0.1";
    char a0[64], a1[64]; snprintf(a0, 64, "%s:7000", ip); snprintf(a1, 64, "%s:7001", ip);
    const char *addrs[2] = {a0, a1};
    struct fab_config c = {.backend = FAB_BACKEND_VERBS, .cluster = "smoke", .nodes = 2, .self = 0,
        .region_size = {65536, 1 << 20, 4096}, .addrs = addrs};
    struct fab *f0, *f1; struct fab_ep *ep;
    fab_unlink(FAB_BACKEND_VERBS, "smoke", 0); fab_unlink(FAB_BACKEND_VERBS, "smoke", 1);
    if (fab_open(&c, &f0, NULL)) { printf("open0 failed\n"); return 1; }
    c.self = 1;
    if (fab_open(&c, &f1, NULL)) { printf("open1 failed\n"); return 1; }
    if (fab_ep_create(f0, 0, &ep)) { printf("ep failed\n"); return 1; }
    static unsigned char w[5000], r[5000];
    for (int i = 0; i < 5000; i++) w[i] = (unsigned char)(i * 7);
    int rc;
    for (uint32_t node = 0; node < 2; node++) {
        if ((rc = ex(ep, FAB_OP_WRITE, node, FAB_REGION_DATA, 12345, w, 5000, 0, 0))) { printf("write %u: %s\n", node, fab_strerror(rc)); return 1; }
        if ((rc = ex(ep, FAB_OP_READ, node, FAB_REGION_DATA, 12345, r, 5000, 0, 0))) { printf("read %u: %s\n", node, fab_strerror(rc)); return 1; }
        if (memcmp(w, r, 5000)) { printf("read %u: wrong data\n", node); return 1; }
        unsigned char s[100];
        if ((rc = ex(ep, FAB_OP_WRITE, node, FAB_REGION_DATA, 64, w, 100, 0, 0)) || (rc = ex(ep, FAB_OP_READ, node, FAB_REGION_DATA, 64, s, 100, 0, 0)) || memcmp(w, s, 100)) { printf("small %u: %s\n", node, fab_strerror(rc)); return 1; }
        uint64_t old = 99;
        if ((rc = ex(ep, FAB_OP_CAS, node, FAB_REGION_INDEX, 800, &old, 8, 0, 0xfeedfacecafebeefULL)) || old != 0) { printf("cas1 %u: %s old %llx\n", node, fab_strerror(rc), (unsigned long long)old); return 1; }
        if ((rc = ex(ep, FAB_OP_CAS, node, FAB_REGION_INDEX, 800, &old, 8, 0, 5)) || old != 0xfeedfacecafebeefULL) { printf("cas2 %u: %s old %llx\n", node, fab_strerror(rc), (unsigned long long)old); return 1; }
        uint64_t word; memcpy(&word, (unsigned char *)fab_local_base(node ? f1 : f0, FAB_REGION_INDEX) + 800, 8);
        if (word != 0xfeedfacecafebeefULL) { printf("cas %u: memory holds %llx\n", node, (unsigned long long)word); return 1; }
        printf("node %u: WRITE 5000 B, READ back, small WRITE/READ, CAS success+failure: ok\n", node);
    }
    fab_ep_destroy(ep); fab_close(f1); fab_close(f0);
    fab_unlink(FAB_BACKEND_VERBS, "smoke", 0); fab_unlink(FAB_BACKEND_VERBS, "smoke", 1);
    printf("verbs smoke: PASS\n");
    return 0;
}

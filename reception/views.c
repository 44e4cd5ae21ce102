/*
 * views.c - the view's value and the member set the next view should have (views.h).
 *
 * Apart from members.c so that these rules, on which the rejoin's safety rests, are tested alone
 * (tests/unit/test_views.c) and read in one place; members.c does the etcd side.
 */
#include "views.h"

#include <errno.h>
#include <glib.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* A missing or malformed field makes the whole value "not a view": members.c then writes a
 * new one rather than act on half of it. */
int view_parse(const char *s, uint64_t *epoch, struct live *lv)
{
    memset(lv, 0, sizeof(*lv));
    char *end;
    errno = 0;
    *epoch = strtoull(s, &end, 10);
    if (errno || end == s || *epoch == 0)
        return -1;
    for (s = end; *s;) {
        while (*s == ' ')
            s++;
        if (!*s)
            break;
        if (*s == 'r') {
            lv->readmit = strtoull(s + 1, &end, 10);
            if (end == s + 1)
                return -1;
            s = end;
            continue;
        }
        unsigned long id = strtoul(s, &end, 10);
        if (end == s || *end != ':' || id >= NESSIE_NODES_MAX || lv->inc[id] || lv->gone[id])
            return -1;
        s = end + 1;
        if (strncmp(s, "gone", 4) == 0) {
            lv->gone[id] = true;
            s += 4;
            if (*s == '@') {
                lv->gone_inc[id] = strtoull(s + 1, &end, 10);
                if (end == s + 1)
                    return -1;
                s = end;
            }
            if (*s != ' ' && *s != '\0')
                return -1;
            continue;
        }
        uint64_t inc = strtoull(s, &end, 10);
        if (end == s || inc == 0)
            return -1;
        lv->inc[id] = inc;
        s = end;
    }
    return 0;
}

char *view_format(uint64_t epoch, const struct live *lv)
{
    GString *s = g_string_new(NULL);
    g_string_append_printf(s, "%" PRIu64, epoch);
    if (lv->readmit)
        g_string_append_printf(s, " r%" PRIu64, lv->readmit);
    for (uint32_t i = 0; i < NESSIE_NODES_MAX; i++) {
        if (lv->inc[i])
            g_string_append_printf(s, " %u:%" PRIu64, i, lv->inc[i]);
        else if (lv->gone[i])
            g_string_append_printf(s, " %u:gone@%" PRIu64, i, lv->gone_inc[i]);
    }
    return g_string_free(s, FALSE);
}


/*
 * A live member whose registration is gone (its lease lapsed) is fenced, with the incarnation it
 * had; a fenced node stays fenced until it is registered again under a newer incarnation (it
 * came back with new tables: members_start) and every live member's scrub is done for this
 * view, so no entry names its old data (membership.h, "Rejoin"), and is then readmitted; any
 * other registered node is live.
 *
 * A member is fenced only once every other registered member's scrub has passed the last
 * readmission (inview->readmit), so that no index still holds an orphan of it at the positions
 * the fence draws again. The nodes hold such a view too (members.c adopt), but only a node for
 * which the view fences a node: one that never acted on the readmission (it read the readmitting
 * view and then this one, or only this one) has the node fenced still and would act on the fence
 * at once, under the placement of the outage, while others still act on the readmission's
 * (model/views.pml, -DBUG_UNHELD_FENCE). Holding the write closes that: a member acks a view
 * only after acting on it. The fence of a node lost again right after its readmission comes
 * later by that much (the survivors' V + F and one scrub pass); its calls wait meanwhile.
 */
void view_want(const struct live *inview, uint64_t epoch, const struct live *now,
               const uint64_t *acked, struct live *want)
{
    static bool told[NESSIE_NODES_MAX]; /* agent thread only: "back" logged */
    static bool held[NESSIE_NODES_MAX]; /* agent thread only: "fence held" logged */
    memset(want, 0, sizeof(*want));
    want->readmit = inview->readmit;
    bool may_readmit = true, swept = true, lapses = false;
    for (uint32_t i = 0; i < NESSIE_NODES_MAX; i++) {
        bool member = inview->inc[i] && now->inc[i];
        may_readmit = may_readmit && (!member || acked[i] >= epoch);
        swept = swept && (!member || acked[i] >= inview->readmit);
        lapses = lapses || (inview->inc[i] && !now->inc[i]);
    }
    /* A fence first: one view never both fences a node and readmits one. Such a view would be
     * held by adopt() until every member's scrub had passed its own readmission, which no
     * member does before acting on it (a deadlock), and the fence would draw positions again
     * while the readmission's orphans are still in the indexes. The readmission waits for the
     * view after (its members' scrubs of the fence, then this rule, as for any). */
    may_readmit = may_readmit && !lapses;
    for (uint32_t i = 0; i < NESSIE_NODES_MAX; i++) {
        bool back = inview->gone[i] && now->inc[i] > inview->gone_inc[i];
        bool lapsed = inview->inc[i] && !now->inc[i];
        if (back && may_readmit) {
            want->inc[i] = now->inc[i];
            want->readmit = epoch + 1;
            told[i] = false;
        } else if (lapsed && !swept) {
            want->inc[i] = inview->inc[i];
            if (!held[i])
                log_info("members: node %u's lease lapsed; it is fenced once every live member's "
                         "scrub has passed view %" PRIu64 ", which readmitted a node", i,
                         inview->readmit);
            held[i] = true;
        } else if (inview->gone[i] || lapsed) {
            want->gone[i] = true;
            want->gone_inc[i] = inview->gone[i] ? inview->gone_inc[i] : inview->inc[i];
            if (back && !told[i])
                log_info("members: node %u is back as incarnation %" PRIu64 "; readmitted once "
                         "every live member's scrub has taken out what named its old tables",
                         i, now->inc[i]);
            told[i] = told[i] || back;
            held[i] = false;
        } else {
            want->inc[i] = now->inc[i];
            held[i] = false;
        }
    }
}

/* helper.h — the function of another compilation unit that lines.c calls. */
#ifndef HELPER_H
#define HELPER_H

int middle(int depth);

/* tp.h's arrival counter is per unit: helper.c arrives through lines.c. */
void lines_arrive(void);

#endif

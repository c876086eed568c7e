/* The spawn floor: a static program that starts and exits. */
int main(void) { return 0; }

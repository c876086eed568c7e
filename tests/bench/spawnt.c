// spawnt N PROG [ARGS] -- PROG2 [ARGS] ...: spawns each command N times (after 5
// warm-ups), interleaved, stdio on /dev/null, and prints wall-clock p10/p50/p90 and
// the mean CPU time (user + system, from wait4) per command. CPU time is much less
// disturbed than wall time when other work shares the machine, so start-up costs of
// two builds can be compared there (docs/benchmarks.md, "Reading the figures on a VM").
//   cc -O2 -o target/bench/spawnt tests/bench/spawnt.c
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <sys/resource.h>
extern char **environ;
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  int n=atoi(argv[1]); char**cmds[16]; int k=0; cmds[k++]=&argv[2];
  for(int i=2;i<argc;i++) if(!strcmp(argv[i],"--")){argv[i]=NULL;cmds[k++]=&argv[i+1];}
  double *t[16],*c[16]; for(int j=0;j<k;j++){t[j]=malloc(sizeof(double)*n);c[j]=malloc(sizeof(double)*n);}
  posix_spawn_file_actions_t fa; posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa,1,"/dev/null",O_WRONLY,0);
  posix_spawn_file_actions_addopen(&fa,2,"/dev/null",O_WRONLY,0);
  posix_spawn_file_actions_addopen(&fa,0,"/dev/null",O_RDONLY,0);
  for(int i=0;i<n+5;i++) for(int j=0;j<k;j++){
    struct timespec a,b; pid_t p; int st;
    clock_gettime(CLOCK_MONOTONIC,&a);
    if(posix_spawn(&p,cmds[j][0],&fa,NULL,cmds[j],environ)){perror("spawn");return 1;}
    struct rusage ru; wait4(p,&st,0,&ru);
    clock_gettime(CLOCK_MONOTONIC,&b);
    if(i>=5){t[j][i-5]=(b.tv_sec-a.tv_sec)*1e6+(b.tv_nsec-a.tv_nsec)/1e3; c[j][i-5]=ru.ru_utime.tv_sec*1e6+ru.ru_utime.tv_usec+ru.ru_stime.tv_sec*1e6+ru.ru_stime.tv_usec;}
  }
  for(int j=0;j<k;j++){qsort(t[j],n,sizeof(double),cmp); double cs=0; for(int i=0;i<n;i++) cs+=c[j][i];
    printf("%-28s %-12s wall p10 %7.1f p50 %7.1f p90 %7.1f us; cpu mean %6.1f us\n",cmds[j][0],cmds[j][1]?cmds[j][1]:"",t[j][n/10],t[j][n/2],t[j][n*9/10],cs/n);}
  return 0;}
